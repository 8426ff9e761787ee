#!/usr/bin/env bash
# make demo: the richest end-to-end job at this commit. First tiny trained checkpoints answer
# questions correctly (assets/models/qwen3-add and llava-shapes, trained in PyTorch by
# scripts/train/qwen3_add.py and llava_shapes.py; the image is a held-out scene); then embedded
# default models that hlx generates itself (tiny random-weight Qwen3 and LLaVA checkpoints in
# Hugging Face layout) at larger shapes.
set -euo pipefail
HLX=${1:-build/bin/hlx}
DIR=${HLX_DEMO_DIR:-build/demo}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DIR"

echo "== 0. a trained tiny Qwen3 (assets/models/qwen3-add) answers in a chat: what is 29 plus 84? (a held-out question)"
ANSWER=$("$HLX" generate -m "$ROOT/assets/models/qwen3-add" --chat -p "What is 29 plus 84?" -n 8 --capacity 64)
echo "$ANSWER"
if [ "$ANSWER" != "113" ]; then
  echo "demo: the trained model answered '$ANSWER', expected 113" >&2; exit 1
fi

echo "== 0b. a trained tiny LLaVA (assets/models/llava-shapes) answers about assets/shapes.png: how many?"
ANSWER=$("$HLX" generate -m "$ROOT/assets/models/llava-shapes" --image "$ROOT/assets/shapes.png" --chat \
  -p "How many?" -n 8 --capacity 64)
echo "$ANSWER"
if [ "$ANSWER" != "3" ]; then
  echo "demo: the trained VLM answered '$ANSWER', expected 3" >&2; exit 1
fi

echo "== 1. a tiny Qwen3 checkpoint (random weights, real Hugging Face layout, real Qwen3 tokenizer)"
"$HLX" fixture --family qwen3 --preset tiny --dtype bf16 --seed 7 --out "$DIR/qwen3-tiny"

echo "== 2. its decode entry as portable StableHLO (capacity 256, 2 slots)"
"$HLX" emit -m "$DIR/qwen3-tiny" --entry decode --capacity 256 --slots 2 -o "$DIR/decode.mlir"
"$HLX" verify "$DIR/decode.mlir"
grep -o 'hlx.identity = "[0-9a-f]*"' "$DIR/decode.mlir" | head -1

echo "== 3. greedy generation by token ids (prefill + decode on the CPU runtime)"
"$HLX" generate -m "$DIR/qwen3-tiny" --tokens 1,2,3,4,5,6,7,8 -n 24 --capacity 256

if [ -f "$DIR/qwen3-tiny/tokenizer.json" ]; then
  echo "== 4. chat-templated text generation, streamed (random weights: expect gibberish, in valid UTF-8)"
  "$HLX" generate -m "$DIR/qwen3-tiny" --chat -p "Write a haiku about the sea." -n 24 --capacity 256
else
  echo "== 4. (skipped: no Qwen3 tokenizer in node_modules; run make setup for the text demo)"
fi

echo "== 5. an over-long request is refused before any slot is touched"
if "$HLX" generate -m "$DIR/qwen3-tiny" --tokens 1,2,3,4,5,6,7,8 -n 300 --capacity 256; then
  echo "expected a capacity error" >&2; exit 1
fi
echo "== 6. a tiny LLaVA checkpoint (CLIP vision tower + projector + Llama text, random weights) answers a"
echo "      question about assets/scene.png; the summary line has the time of every stage"
"$HLX" fixture --family llava-clip --preset tiny --seed 7 --out "$DIR/llava-tiny"
if [ -f "$DIR/llava-tiny/tokenizer.json" ]; then
  "$HLX" generate -m "$DIR/llava-tiny" --image "$ROOT/assets/scene.png" --chat -p "What is in this picture?" \
    -n 24 --capacity 256
else
  # No tokenizer: the prompt as ids, its image token written by id.
  IMG=$(grep -o '"image_token_index": *[0-9]*' "$DIR/llava-tiny/config.json" | grep -o '[0-9]*$')
  "$HLX" generate -m "$DIR/llava-tiny" --image "$ROOT/assets/scene.png" --tokens "1,$IMG,5,6,7" -n 24 --capacity 256
fi
echo "demo: ok"
