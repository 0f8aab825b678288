"""The sampler library on one prompt: each sampler runs as a device epilogue, its state in device channels.

Penalties keep seen-token counts on the device (scatter_add per drawn token), Mirostat keeps
mu there, and every sampler's RNG state [key, counter] advances on the device; only the
drawn token reaches the host.

    python examples/samplers.py "Once upon a time" --max-tokens 32
"""

import argparse

import piegpu
from piegpu import samplers

CHAINS = {
    "greedy": samplers.greedy(),
    "greedy + repetition penalty 1.3": samplers.greedy().with_penalties(repetition=1.3),
    "top-k 40, T=0.8": samplers.top_k(40, 0.8),
    "top-p 0.9, T=0.8": samplers.top_p(0.9, 0.8),
    "min-p 0.1": samplers.min_p(0.1),
    "top-a 0.2": samplers.top_a(0.2),
    "typical 0.9": samplers.typical(0.9),
    "epsilon-cutoff 3e-4": samplers.epsilon_cutoff(3e-4),
    "eta-cutoff 3e-4": samplers.eta_cutoff(3e-4),
    "mirostat v2 tau=3": samplers.mirostat(3.0, 0.1),
    "top-k 50 + top-p 0.95, T=0.7, presence 0.5, frequency 0.3":
        samplers.chain(samplers.TopK(50), samplers.TopP(0.95), temperature=0.7).with_penalties(presence=0.5,
                                                                                              frequency=0.3),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="Once upon a time")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    model = piegpu.load_model()
    for label, sampler in CHAINS.items():
        g = model.generate(args.prompt, max_tokens=args.max_tokens, sampler=sampler, seed=args.seed)
        text = g.run()
        states = ", ".join(f"{s.name}{list(s.shape)}" for s in sampler.states(model.config.vocab_size)) or "none"
        print(f"--- {label}  (device state: {states}; {g.stats.decode_tokens_per_s:.1f} tokens/s)")
        print(args.prompt + text)


if __name__ == "__main__":
    main()
