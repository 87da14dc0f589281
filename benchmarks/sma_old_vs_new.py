"""Time ``sma`` (every order and ``auto``) with whichever structmat tree is given, to compare two trees.

Run by hand, alternating trees, one process per round: ``python benchmarks/sma_old_vs_new.py <tree root>``
prints JSON ``{"mask|N|T|order": best ms}`` (B = 1, H = 2, one thread; masks from ``bench_sma.make_mask``
of that tree). The house issue compares the tree before the package restructure (``git worktree add
--detach /tmp/oldtree 0bd7ed7``) with main this way: ``benchmarks/results/house_old_vs_new_sma_cpu_*.json``.
"""

import json
import sys
import time

import torch


def main(root: str) -> None:
    sys.path[:0] = [root, root + "/benchmarks"]
    from bench_sma import make_mask

    import structmat as sm

    torch.set_num_threads(1)
    out = {}
    for name in ("OneSS", "SSS(4)", "causal Toeplitz", "Fourier", "Quasiseparable"):
        for N in (16, 64):
            for T in (256, 1024, 4096, 16384):
                mask = make_mask(name, T, 2, torch.device("cpu"))
                g = torch.Generator().manual_seed(0)
                q, k, v = (torch.randn(1, T, 2, N, generator=g) / N**0.5 for _ in range(3))
                for order in ("quadratic", "linear", "chunked", "auto"):
                    if order == "quadratic" and T > 4096:
                        continue
                    kw = {} if order == "auto" else {"order": order}
                    try:
                        out[f"{name}|{N}|{T}|{order}"] = best_ms(lambda: sm.sma(q, k, v, mask, **kw))
                    except (ValueError, TypeError):  # an order the mask does not admit
                        continue
    print(json.dumps(out))


def best_ms(fn, budget: float = 0.15) -> float:
    with torch.no_grad():
        fn()
        times, end = [], time.perf_counter() + budget
        while len(times) < 3 or (time.perf_counter() < end and len(times) < 50):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


if __name__ == "__main__":
    main(sys.argv[1])
