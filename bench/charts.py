"""One chart per workload (``WORKLOAD.png``): per case, each implementation's median time as a
bar, the interquartile range as an error bar, and the samples as dots. Needs matplotlib."""
from pathlib import Path

from .report import groups, seconds

MISSING = 'matplotlib is not installed (pip install -e ".[plot]"): no charts drawn'


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _panel(ax, case, rows):
    names = [r["impl"] for r in rows][::-1]
    stats = [r["stats"] for r in rows][::-1]
    med = [s["median"] for s in stats]
    err = [[s["median"] - s["q1"] for s in stats], [s["q3"] - s["median"] for s in stats]]
    ax.barh(names, med, xerr=err, color="tab:blue", alpha=0.7, capsize=3, error_kw={"elinewidth": 1})
    for y, (r, s) in enumerate(zip(rows[::-1], stats)):
        ax.plot(r["samples"], [y] * len(r["samples"]), "k.", markersize=2)
        ax.annotate(seconds(s["median"]), (s["max"], y), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=8)
    if max(med) > 20 * min(med):
        ax.set_xscale("log")
        ax.set_xlim(min(min(s["min"] for s in stats), min(med)) / 2, max(s["max"] for s in stats) * 4)
    else:
        ax.set_xlim(0, max(s["max"] for s in stats) * 1.3)
    ax.xaxis.set_major_formatter(lambda v, _: seconds(v) if v > 0 else "0")
    ax.set_title(case, fontsize=9, loc="left")
    ax.tick_params(labelsize=8)


def draw(rows, folder):
    """Draws the chart of each workload with timed rows into ``folder``; returns the paths
    written, or a note (a str) when matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return MISSING
    by_workload = {}
    for (workload, case), block in groups(r for r in rows if r["stats"]):
        by_workload.setdefault(workload, []).append((case, block))
    paths = []
    for workload, cases in by_workload.items():
        heights = [0.3 * len(block) + 0.7 for _, block in cases]
        fig, axes = plt.subplots(len(cases), 1, figsize=(9, sum(heights) + 0.8), squeeze=False,
                                 gridspec_kw={"height_ratios": heights})
        for ax, (case, block) in zip(axes[:, 0], cases):
            _panel(ax, case, block)
        axes[-1, 0].set_xlabel("bar: median; error bar: interquartile range; dots: samples",
                               fontsize=8)
        fig.suptitle(f"{workload} workload", fontsize=11)
        fig.tight_layout()
        path = Path(folder) / f"{workload}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths
