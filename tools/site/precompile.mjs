// Run tools/site/precompile.py in Pyodide under Node.js (its own CPython, so the bytecode is
// the one Pyodide reads):
//   node precompile.mjs PYODIDE_DIR IN_DIR OUT_DIR
// IN_DIR and OUT_DIR are mounted at /in and /out; matplotlib is loaded for its font list.
import fs from "fs";
import path from "path";
import { fileURLToPath, pathToFileURL } from "url";

const [pyodideDir, inDir, outDir] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const { loadPyodide } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: pyodideDir + path.sep, stdout: console.log,
                               stderr: console.error });
await py.loadPackage(["matplotlib"], { messageCallback: () => {} });
for (const [dir, at] of [[inDir, "/in"], [outDir, "/out"]]) {
  py.FS.mkdirTree(at);
  py.FS.mount(py.FS.filesystems.NODEFS, { root: path.resolve(dir) }, at);
}
try {
  py.runPython(fs.readFileSync(path.join(here, "precompile.py"), "utf8"));
} catch (e) {
  console.error(String(e));
  process.exit(1);
}
