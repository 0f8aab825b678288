// erf(x) in f32 (WGSL has none): Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7, about f32's own rounding.
fn erf_f32(x: f32) -> f32 {
  let a = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * a);
  let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  return sign(x) * (1.0 - poly * exp(-a * a));
}
