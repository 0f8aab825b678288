// KV pages (model/kv_pool.py): PAGE positions a page, every layer's K and V of a page at the same
// pool rows. A sequence's page-table row starts at word tb of `tables`: [length, positions, -, -,
// page of positions 0..PAGE-1, page of PAGE..2 PAGE-1, ...]; a single-sequence kernel binds its
// own row as `tables` (tb = 0).
const PAGE: u32 = {{PAGE}}u;  // a power of two

// The pool row of position p of the sequence whose table row starts at word tb.
fn kv_row(tb: u32, p: u32) -> u32 {
  return tables[tb + 4u + p / PAGE] * PAGE + p % PAGE;
}
