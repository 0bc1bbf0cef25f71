"""The alpha-beta model of docs/scaling.md: ring all-reduce time and DDP step time for
8 to 256 ranks on a 100 Gb/s network, for the MLP and a 100M-parameter model, with and
without overlap. Arithmetic on the inputs (the defaults are this VM's measurements and
the stated assumptions; see docs/scaling.md):

    python benchmarks/scaling_model.py [--call-us 10] [--alpha-us 5] [--gbps 100]
                                       [--mlp-ms 15] [--big-ms 100] [--bwd-frac 0.5]

Ring all-reduce of M bytes over n ranks in k buckets (each bucket one call, one ring):

    T_ar = k * (c + 2 (n - 1) alpha)  +  2 (n - 1) / n * M / beta

c: tapegrad's cost per call (measured: tg minus mpi4py for a 4-byte all-reduce);
alpha: one ring step of a small message on the network (latency); beta: the link's
bytes per second. DDP step, weak scaling (the per-rank batch is fixed, so the compute
per rank is constant):

    no overlap:   T = T_compute + T_ar
    overlap:      T = T_compute + max(T_ar(one bucket), T_ar - (1 - 1/k) T_backward)

(the all-reduces of all buckets but the last can run during the backward; the last
bucket holds the first layers, whose gradients come last).
"""
import argparse


def ring(n, nbytes, call, alpha, beta, buckets=1):
    if n == 1:
        return 0.0
    return buckets * (call + 2 * (n - 1) * alpha) + 2 * (n - 1) / n * nbytes / beta


def step(n, nbytes, call, alpha, beta, compute, backward, buckets):
    t_ar = ring(n, nbytes, call, alpha, beta, buckets)
    no_overlap = compute + t_ar
    last = ring(n, nbytes / buckets, call, alpha, beta, 1)
    overlap = compute + max(last, t_ar - (1 - 1 / buckets) * backward)
    return t_ar, no_overlap, overlap


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--call-us", type=float, default=10.0,
                    help="tapegrad's cost per all_reduce call (measured on loopback)")
    ap.add_argument("--alpha-us", type=float, default=5.0,
                    help="one ring step of a small message on the network")
    ap.add_argument("--gbps", type=float, default=100.0, help="link, Gb/s")
    ap.add_argument("--mlp-ms", type=float, default=15.0,
                    help="one rank's MLP step (784-512-512-10, batch 128), measured")
    ap.add_argument("--big-ms", type=float, default=100.0,
                    help="one rank's step of the 100M-parameter model (assumed)")
    ap.add_argument("--bwd-frac", type=float, default=0.5,
                    help="the backward's share of a step (measured ~0.47 for the MLP)")
    args = ap.parse_args()
    call, alpha = args.call_us * 1e-6, args.alpha_us * 1e-6
    beta = args.gbps / 8 * 1e9
    models = [("MLP 784-512-512-10 (669,706 params, 2.7 MB)", 669_706 * 4, args.mlp_ms,
               (1, 3)),
              ("100M-parameter model (400 MB fp32)", 100_000_000 * 4, args.big_ms, (1, 16))]
    print(f"c = {args.call_us:g} us per call, alpha = {args.alpha_us:g} us per ring step, "
          f"beta = {beta / 1e9:.1f} GB/s ({args.gbps:g} Gb/s), backward = "
          f"{args.bwd_frac:.0%} of the step\n")
    for name, nbytes, ms, bucket_counts in models:
        compute = ms * 1e-3
        for k in bucket_counts:
            print(f"### {name}, {k} bucket(s), compute {ms:g} ms per rank\n")
            print("| ranks | all-reduce | step, no overlap | step, overlap | efficiency "
                  "(no overlap / overlap) |")
            print("| ---: | ---: | ---: | ---: | ---: |")
            for n in (1, 8, 16, 32, 64, 128, 256):
                t_ar, t_no, t_ov = step(n, nbytes, call, alpha, beta, compute,
                                        compute * args.bwd_frac, k)
                print(f"| {n} | {t_ar * 1e3:.2f} ms | {t_no * 1e3:.2f} ms | "
                      f"{t_ov * 1e3:.2f} ms | {compute / t_no:.0%} / {compute / t_ov:.0%} |")
            print()


if __name__ == "__main__":
    main()
