// Runs an ONNX file in ONNX Runtime (onnxruntime-node, CPU): node ort_run.js MODEL PIXELS.f32 N,C,H,W
// PIXELS.f32 holds the float32 pixel_values, row-major. Prints {"logits": [[...], ...], "outputs": [...]}.
const fs = require("fs");
const ort = require("onnxruntime-node");

async function main() {
  const [model, pixels, dims] = process.argv.slice(2);
  const shape = dims.split(",").map(Number);
  const bytes = fs.readFileSync(pixels);
  const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  const session = await ort.InferenceSession.create(model, { intraOpNumThreads: 2 });
  const result = await session.run({ pixel_values: new ort.Tensor("float32", data, shape) });
  const logits = result.logits;
  const rows = [];
  for (let i = 0; i < logits.dims[0]; ++i) {
    rows.push(Array.from(logits.data.slice(i * logits.dims[1], (i + 1) * logits.dims[1])));
  }
  console.log(JSON.stringify({ logits: rows, inputs: session.inputNames, outputs: session.outputNames }));
}

main().catch((e) => {
  console.error(e.message);
  process.exit(1);
});
