"""Probe for patch 0003, run as a script by test_patches.py (vLLM needs a __main__ guard: it spawns workers).

    python vllm_reload_probe.py MODEL_DIR plain|layerwise

Loads MODEL_DIR in vLLM's CPU engine, then pushes a different set of weights (every projection negated) into the
live model the way verl's weight sync does: `plain` = load_weights in place (verl 0.9.1 unpatched), `layerwise` =
wrapped in vLLM's layer-wise reload (the patch). Prints one line: RESULT changed|unchanged|error ...
"""

import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # keep the engine in this process: collective_rpc stays simple


def push_negated_weights(worker, model_dir: str, layerwise: bool) -> None:
    import torch
    from safetensors.torch import load_file

    model = worker.model_runner.model
    model_config = worker.model_runner.vllm_config.model_config
    state = load_file(os.path.join(model_dir, "model.safetensors"))
    weights = [(name, -tensor if "proj" in name else tensor) for name, tensor in state.items()]
    if layerwise:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        initialize_layerwise_reload(model)
        model.load_weights(weights)
        finalize_layerwise_reload(model, model_config)
    else:
        from vllm.model_executor.model_loader.utils import process_weights_after_loading

        model.load_weights(weights)
        process_weights_after_loading(model, model_config, torch.device("cpu"))


def main() -> None:
    from vllm import LLM, SamplingParams

    model_dir, mode = sys.argv[1], sys.argv[2]
    llm = LLM(model=model_dir, enforce_eager=True, dtype="bfloat16", max_model_len=512, seed=0)
    greedy = SamplingParams(temperature=0, max_tokens=12)
    before = list(llm.generate(["What is 12 * 34?"], greedy)[0].outputs[0].token_ids)
    try:
        llm.collective_rpc(push_negated_weights, args=(model_dir, mode == "layerwise"))
    except Exception as exc:  # the failure mode under test
        print(f"RESULT error {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        return
    after = list(llm.generate(["What is 12 * 34?"], greedy)[0].outputs[0].token_ids)
    print(f"RESULT {'changed' if after != before else 'unchanged'} {before[:4]} -> {after[:4]}", flush=True)


if __name__ == "__main__":
    main()
