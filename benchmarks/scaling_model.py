"""The alpha-beta model of docs/scaling.md: ring all-reduce time and DDP step time for
8 to 256 ranks on a 100 Gb/s network, for the MLP and a 100M-parameter model, with and
without overlap. Pure arithmetic on the inputs below (edit them, or pass them):

    python benchmarks/scaling_model.py [--alpha-us 12] [--gbps 100] [--reduce-gbs 8]
                                       [--mlp-ms 9.5] [--big-ms 100]

Ring all-reduce of M bytes over n ranks, in k buckets (each bucket is one ring):

    T_ar = k * 2 (n - 1) * alpha  +  2 (n - 1) / n * M / beta

alpha: the time of one ring step for a small message (software + wire); beta: the
bytes per second a rank moves and reduces, min(link, the CPU's reduce rate). DDP step,
weak scaling (the per-rank batch is fixed, so the compute per rank is constant):

    no overlap:   T = T_compute + T_ar
    overlap:      T = T_compute + max(T_ar(last bucket), T_ar - (1 - 1/k) * T_backward)

the all-reduces of all buckets but the last can run during the backward (the last
bucket holds the first layers, whose gradients come last); ``T_backward`` is 2/3 of
the compute (backward ~ twice the forward).
"""
import argparse


def ring(n, nbytes, alpha, beta, buckets=1):
    if n == 1:
        return 0.0
    return buckets * 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / beta


def step(n, nbytes, alpha, beta, compute, buckets):
    t_ar = ring(n, nbytes, alpha, beta, buckets)
    no_overlap = compute + t_ar
    backward = compute * 2 / 3
    last = ring(n, nbytes / buckets, alpha, beta, 1)
    overlap = compute + max(last, t_ar - (1 - 1 / buckets) * backward)
    return t_ar, no_overlap, overlap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha-us", type=float, default=12.0,
                    help="one ring step of a small message: measured tg all_reduce "
                         "latency on loopback (~10 us) + ~2 us of wire/NIC")
    ap.add_argument("--gbps", type=float, default=100.0, help="link, Gb/s")
    ap.add_argument("--reduce-gbs", type=float, default=8.0,
                    help="the rate a rank reduces received data, GB/s (memory bound)")
    ap.add_argument("--mlp-ms", type=float, default=9.5,
                    help="one rank's MLP step (784-512-512-10, batch 128), measured")
    ap.add_argument("--big-ms", type=float, default=100.0,
                    help="one rank's step of the 100M-parameter model (assumed)")
    args = ap.parse_args()
    alpha = args.alpha_us * 1e-6
    beta = min(args.gbps / 8 * 1e9, args.reduce_gbs * 1e9)
    models = [("MLP 784-512-512-10 (669,706 params, 2.7 MB)", 669_706 * 4, args.mlp_ms * 1e-3,
               (1,)),
              ("100M-parameter model (400 MB fp32)", 100_000_000 * 4, args.big_ms * 1e-3,
               (1, 16))]
    print(f"alpha = {args.alpha_us:g} us, beta = {beta / 1e9:.1f} GB/s "
          f"(min of {args.gbps:g} Gb/s = {args.gbps / 8:.1f} GB/s and the reduce rate "
          f"{args.reduce_gbs:g} GB/s)\n")
    for name, nbytes, compute, bucket_counts in models:
        for k in bucket_counts:
            print(f"### {name}, {k} bucket(s), compute {compute * 1e3:g} ms per rank\n")
            print("| ranks | all-reduce | step, no overlap | step, overlap | efficiency "
                  "(no overlap / overlap) |")
            print("| ---: | ---: | ---: | ---: | ---: |")
            for n in (1, 8, 16, 32, 64, 128, 256):
                t_ar, t_no, t_ov = step(n, nbytes, alpha, beta, compute, k)
                print(f"| {n} | {t_ar * 1e3:.2f} ms | {t_no * 1e3:.2f} ms | "
                      f"{t_ov * 1e3:.2f} ms | {compute / t_no:.0%} / {compute / t_ov:.0%} |")
            print()


if __name__ == "__main__":
    main()
