#!/usr/bin/env bash
# The main job on the bundled default, no network, no GPU: create a small ViT, fine-tune it on the bundled real
# ChestX-ray14 sample (official patient-disjoint split), evaluate on the official test images among them, export it
# in Hugging Face format and run it on a full-size radiograph. Expects scripts/setup.sh to have built build/vitpipe.
#   scripts/demo.sh [OUTPUT_DIR]      (default: demo-output; it is replaced if it holds an earlier demo)
set -euo pipefail
cd "$(dirname "$0")/.."
vitpipe=build/vitpipe
data=data/chestxray14-sample
out=${1:-demo-output}
[[ -x $vitpipe ]] || { echo "build/vitpipe is missing: run scripts/setup.sh first" >&2; exit 1; }
if [[ -e $out ]]; then
  [[ -f $out/.vitpipe-demo ]] || { echo "$out exists and is not an earlier demo output; pass another directory" >&2; exit 1; }
  rm -rf "$out"
fi
mkdir -p "$out" && touch "$out/.vitpipe-demo"

echo "== 1. the data: a real ChestX-ray14 sample (1,000 images at 64x64, NIH Clinical Center; see $data/ATTRIBUTION.md)"
$vitpipe data inspect --data chestxray14:$data

echo "== 2. a randomly initialised ViT (vit-mini: 64 px, patch 8, 4 layers) in Hugging Face format"
$vitpipe init --preset vit-mini --labels chestxray14 --seed 0 --out "$out/initial-model"

echo "== 3. fine-tune: 14 findings, BCE, AdamW + cosine schedule, validation ROC-AUC each epoch, best model exported"
$vitpipe train --model "$out/initial-model" --data chestxray14:$data --output-dir "$out/run" \
  --epochs 8 --batch-size 32 --micro-batch-size 16 --lr 5e-4 --warmup-ratio 0.1 --seed 0 --test

echo "== 4. evaluate the exported model on the official test images of the sample (bootstrap 95% CIs)"
$vitpipe eval --model "$out/run/model" --data chestxray14:$data --split test --bootstrap 200

echo "== 5. predict on a full-size 1024x1024 radiograph (resized exactly as ViTImageProcessor would), with its heatmap"
$vitpipe predict --model "$out/run/model" $data/full-size/00000013_003.png --heatmap "$out/run/heatmaps-full-size"

echo "== 6. a task this small model CAN learn: the projection (AP vs PA) of the same images, from the sample's metadata"
$vitpipe init --preset vit-mini --labels AP --seed 0 --out "$out/initial-view-model"
$vitpipe train --model "$out/initial-view-model" --data csv:$data/view_position.csv --output-dir "$out/view" \
  --epochs 8 --batch-size 32 --micro-batch-size 16 --lr 5e-4 --warmup-ratio 0.1 --seed 0 --test

echo "== 7. where the view model looks: three methods on a full-size AP film"
$vitpipe explain --model "$out/view/model" --method grad-rollout --method gradcam --method rollout \
  --finding AP --out "$out/view/heatmaps-full-size" $data/full-size/00000013_003.png

cat <<MSG

Done. The 14 findings: model in $out/run/model (config.json, model.safetensors, preprocessor_config.json;
transformers loads it with AutoModelForImageClassification.from_pretrained; README.md is its model card, as the
Hugging Face Hub reads it), report $out/run/report.html. A model
this small trained on 621 images stays near chance on them: a demonstration of the pipeline, not a diagnostic model.
The projection task: $out/view/report.html (ROC, PR, calibration, operating points, heatmaps; open it in a browser,
it needs no network), heatmaps of a full-size film in $out/view/heatmaps-full-size/.

With the full NIH dataset (https://nihcc.app.box.com/v/ChestXray-NIHCC) and a real checkpoint:
  $vitpipe download google/vit-base-patch16-224-in21k
  $vitpipe data prepare --data chestxray14:/path/to/nih --image-size 224 --out /path/to/nih-224   # decode once
  $vitpipe train --model google/vit-base-patch16-224-in21k --data cache:/path/to/nih-224 \\
      --output-dir runs/vit-base --epochs 3 --batch-size 128 --micro-batch-size 16 --precision auto --test
  mpirun -np 4 $vitpipe train ... --pipeline-stages 4     # model parallel over 4 processes (x replicas if -np 8)
MSG
