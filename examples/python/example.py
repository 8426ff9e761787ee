"""Load a checkpoint, stream a generation, cancel another, through libhlx.so (see hlx.py).

    /usr/bin/python3 examples/python/example.py MODEL_DIR [--library path/to/libhlx.so] [--prompt TEXT]
"""
import argparse
import sys

import hlx


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model_dir")
    ap.add_argument("--library", help="libhlx.so to load (default: $HLX_LIBRARY or the loader's path)")
    ap.add_argument("--prompt", default="Tell me a story.")
    ap.add_argument("-n", type=int, default=24)
    args = ap.parse_args(argv)

    hlx.load_library(args.library)
    print(f"libhlx {hlx.version()}")
    with hlx.Model(args.model_dir, context_capacity=256, slots=2) as model:
        print(f"model: {model.info}")

        # Stream: every token event carries the text it decided.
        print("stream: ", end="")
        for event in model.stream(args.prompt, max_new_tokens=args.n):
            if event.kind == hlx.EVENT_TOKEN:
                print(event.text, end="", flush=True)
            else:
                print(f"\n  finished: {hlx.FINISH_NAMES[event.finish]}")

        # Cancel: stop a request after its third token.
        tokens = 0
        for event in model.stream(args.prompt, max_new_tokens=args.n):
            if event.kind == hlx.EVENT_TOKEN:
                tokens += 1
                if tokens == 3:
                    model.cancel(event.id)
            else:
                print(f"cancelled after {tokens} tokens: finish = {hlx.FINISH_NAMES[event.finish]}")

        # Errors carry the C status and the library's message.
        try:
            model.submit([1, 2, 3], max_new_tokens=model.info["context_capacity"])
        except hlx.Error as e:
            print(f"refused: {e.name}: {e.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
