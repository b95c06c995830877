"""Probe for patch 0003, run as a script by test_patches.py (vLLM needs a __main__ guard: it spawns workers).

    python vllm_reload_probe.py MODEL_DIR DTYPE plain|layerwise|fresh

Every mode prints one line, ``RESULT <outcome> <before> <after>`` (token ids as JSON lists), where the new weights
are MODEL_DIR's with every projection negated:

- ``plain``: load MODEL_DIR in vLLM's CPU engine, then push the new weights into the live model the way verl 0.9.1's
  weight sync does (``load_weights`` in place). Outcome ``changed``, ``unchanged`` or ``error <what>``.
- ``layerwise``: the same push wrapped in vLLM's layer-wise reload (what patch 0003 does).
- ``fresh``: a new engine loaded from the new weights on disk: the output a sync that lands must reproduce.

DTYPE is the engine's compute dtype (bfloat16 or float32).
"""

import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # keep the engine in this process: collective_rpc stays simple

PROMPT = "What is 12 * 34?"


def compact(tokens: list[int]) -> str:
    return json.dumps(tokens, separators=(",", ":"))  # one word: the RESULT line splits on spaces


def negated_weights(model_dir: str) -> list:
    from safetensors.torch import load_file

    state = load_file(os.path.join(model_dir, "model.safetensors"))
    return [(name, -tensor if "proj" in name else tensor) for name, tensor in state.items()]


def push_negated_weights(worker, model_dir: str, layerwise: bool) -> None:
    import torch

    model = worker.model_runner.model
    model_config = worker.model_runner.vllm_config.model_config
    weights = negated_weights(model_dir)
    if layerwise:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        initialize_layerwise_reload(model)
        model.load_weights(weights)
        finalize_layerwise_reload(model, model_config)
    else:
        from vllm.model_executor.model_loader.utils import process_weights_after_loading

        model.load_weights(weights)
        process_weights_after_loading(model, model_config, torch.device("cpu"))


def greedy(llm) -> list[int]:
    from vllm import SamplingParams

    return list(llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=24))[0].outputs[0].token_ids)


def main() -> None:
    from vllm import LLM

    model_dir, dtype, mode = sys.argv[1:4]
    engine = {"enforce_eager": True, "dtype": dtype, "max_model_len": 512, "seed": 0}
    if mode == "fresh":
        from safetensors.torch import save_file

        with tempfile.TemporaryDirectory() as copy:
            shutil.copytree(model_dir, copy, dirs_exist_ok=True)
            save_file(
                {name: tensor.contiguous() for name, tensor in negated_weights(model_dir)},
                os.path.join(copy, "model.safetensors"),
                metadata={"format": "pt"},
            )
            tokens = greedy(LLM(model=copy, **engine))
        print(f"RESULT fresh [] {compact(tokens)}", flush=True)
        return
    llm = LLM(model=model_dir, **engine)
    before = greedy(llm)
    try:
        llm.collective_rpc(push_negated_weights, args=(model_dir, mode == "layerwise"))
    except Exception as exc:  # verl 0.9.1's in-place load into packed layers fails here
        what = f"{type(exc).__name__}: {str(exc)[:200]}".replace("\n", " ")
        print(f"RESULT error {compact(before)} [] {what}", flush=True)
        return
    after = greedy(llm)
    print(f"RESULT {'changed' if after != before else 'unchanged'} {compact(before)} {compact(after)}", flush=True)


if __name__ == "__main__":
    main()
