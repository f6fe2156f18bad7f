// Run a Python script in Pyodide under Node.js: the kit on real 32-bit WebAssembly NumPy,
// with no browser (tests/test_pyodide.py).
//   node run_in_pyodide.mjs PYODIDE_DIR KIT_WHEEL SCRIPT.py [FILE ...]
// FILEs are copied to /work/ in Pyodide's file system; the kit's wheel and any other
// pure-Python wheel among them are unpacked onto sys.path; the script's stdout is printed.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

const [pyodideDir, wheel, script, ...files] = process.argv.slice(2);
const { loadPyodide } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href);
const py = await loadPyodide({ indexURL: pyodideDir + path.sep, stdout: console.log,
                               stderr: console.error });
await py.loadPackage(["numpy", "matplotlib", "ipython"], { messageCallback: () => {} });
py.FS.mkdirTree("/work");
for (const f of [wheel, ...files]) {
  py.FS.writeFile("/work/" + path.basename(f), fs.readFileSync(f));
}
py.runPython(`
import glob, sys, zipfile
for whl in glob.glob("/work/*.whl"):
    zipfile.ZipFile(whl).extractall("/work/site")
sys.path.insert(0, "/work/site")
`);
try {
  py.runPython(fs.readFileSync(script, "utf8"));
} catch (e) {
  console.error(String(e));
  process.exit(1);
}
