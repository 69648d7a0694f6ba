"""Draws workload a of bench/compare.sh: checkout+complete jobs/s vs clients, one line per system.

    python3 bench/chart.py bench/results/parts/a.csv bench/results/throughput.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = list(csv.reader(open(sys.argv[1])))
systems, data = rows[0][1:], rows[1:]
clients = [int(r[0]) for r in data]
fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
for i, name in enumerate(systems):
    ax.plot(clients, [float(r[i + 1] or 0) for r in data], marker="o", label=name, linewidth=2)
ax.set_xscale("log", base=2)
ax.set_xticks(clients, [str(c) for c in clients])
ax.set_xlabel("pgbench clients")
ax.set_ylabel("jobs/s (checkout + complete)")
ax.set_title("Checkout + complete, backlog of 100,000 ready jobs")
ax.grid(True, alpha=0.3)
ax.set_ylim(bottom=0)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2])
