// Run as a script (node sdk/js/examples/top_a.js > top_a.eta), an example writes its container bytes to stdout.
import { pathToFileURL } from "node:url";

/** Write `prog`'s container bytes to stdout when `moduleUrl` is the script node was started with. */
export function writeWhenRun(moduleUrl, prog) {
  if (process.argv[1] && pathToFileURL(process.argv[1]).href === moduleUrl) {
    process.stdout.write(prog.toBytes());
    process.stderr.write(`${prog.nodes.length} nodes, hash ${prog.hash}\n`);
  }
}
