#!/usr/bin/env python3
"""Plots a soak run's samples (the soak.csv of `relay-harness soak`) into a PNG.

Usage: plot_soak.py SOAK_CSV OUTPUT_PNG

Three panels over the run's time: the relay's RSS (MiB) with the least-squares trend over the
second half of production (the figure the soak reports), the event->answer latency p50 and p99 of
each 10 s window, and the achieved events/s (produced) and results/s. The drain after production
ends is shaded.
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def read_samples(path):
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        sys.exit(f"plot_soak: {path} has no samples")
    return rows


def column(rows, name, kind=float):
    return [kind(row[name]) for row in rows]


def second_half_trend(rows):
    """The RSS least-squares line over the second half of production: (xs, ys, MiB per 10 min) or None."""
    producing = [row for row in rows if row["phase"] == "produce"]
    if not producing:
        return None
    end = float(producing[-1]["elapsed_s"])
    half = [row for row in producing if float(row["elapsed_s"]) >= end / 2]
    if len(half) < 2:
        return None
    xs = column(half, "elapsed_s")
    ys = column(half, "rss_mib")
    mean_x = sum(xs) / len(xs)
    mean_y = sum(ys) / len(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx
    line = [mean_y + slope * (x - mean_x) for x in xs]
    return xs, line, slope * 600


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = read_samples(sys.argv[1])
    minutes = [value / 60 for value in column(rows, "elapsed_s")]
    produce = [m for m, row in zip(minutes, rows) if row["phase"] == "produce"]
    drain = [m for m, row in zip(minutes, rows) if row["phase"] == "drain"]

    figure, (rss, latency, rate) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    rss.plot(minutes, column(rows, "rss_mib"), label="relay RSS")
    trend = second_half_trend(rows)
    if trend:
        xs, line, per_ten_minutes = trend
        rss.plot([x / 60 for x in xs], line, "--", label=f"trend, 2nd half: {per_ten_minutes:+.1f} MiB / 10 min")
    rss.set_ylabel("MiB")
    rss.set_ylim(bottom=0)
    rss.legend(loc="lower right")

    # A window without results has no latency: leave a gap rather than draw a zero.
    answered = [int(row["window_results"]) > 0 for row in rows]
    for name, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        values = [value if has else float("nan") for value, has in zip(column(rows, name), answered)]
        latency.plot(minutes, values, label=label)
    latency.set_ylabel("event→answer, ms")
    latency.set_ylim(bottom=0)
    latency.legend(loc="upper right")

    rate.plot(minutes, column(rows, "events_per_s"), label="events produced / s")
    rate.plot(minutes, column(rows, "results_per_s"), label="results / s")
    rate.set_ylabel("per second")
    rate.set_xlabel("minutes")
    rate.set_ylim(bottom=0)
    rate.legend(loc="lower right")

    for axis in (rss, latency, rate):
        axis.grid(alpha=0.3)
        if drain:
            axis.axvspan(produce[-1] if produce else drain[0], drain[-1], color="grey", alpha=0.15)
    interval = float(rows[1]["elapsed_s"]) - float(rows[0]["elapsed_s"]) if len(rows) > 1 else float(rows[0]["elapsed_s"])
    figure.suptitle(f"apns-relay soak: {interval:.0f} s samples (shaded: draining after production)")
    figure.tight_layout()
    figure.savefig(sys.argv[2], dpi=110)
    print(f"plot_soak: wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
