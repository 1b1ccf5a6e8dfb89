"""What the precision search shows: the per-layer sensitivity table (JSON, Markdown) and the
accuracy-against-speed chart of every candidate with the budget line."""

import os

from trtkit import log
from trtkit.deps import available
from trtkit.fileio import atomic_path, write_json, write_text


def write_reports(out_dir, name, search, selection):
    """Write NAME.sensitivity.json / .md and NAME.auto.png into ``out_dir``; returns the file names written."""
    written = []
    json_name = "{}.sensitivity.json".format(name)
    write_json(os.path.join(out_dir, json_name), {"metric": search["metric"], "best_method": search["best_method"],
                                                  "tune_images": search["tune_images"],
                                                  "layers": search["sensitivity"]})
    written.append(json_name)
    md_name = "{}.sensitivity.md".format(name)
    write_text(os.path.join(out_dir, md_name), sensitivity_markdown(search, selection))
    written.append(md_name)
    png_name = "{}.auto.png".format(name)
    if chart(os.path.join(out_dir, png_name), selection):
        written.append(png_name)
    return written


def sensitivity_markdown(search, selection):
    label = selection.get("metric_label", selection["metric"])
    lines = ["# Precision search", "",
             "Budget: {:g} points of {} against FP32, judged on {}. Chosen: **{}**.".format(
                 selection["max_drop"], label, "the measured drop" if selection.get("budget_rule") == "estimate"
                 else "the upper end of the drop's 95% interval", selection["chosen"]), "",
             "| candidate | precision | {} | drop (points) | its 95% interval's upper end | img/s | within budget "
             "|".format(label), "|---|---|---|---|---|---|---|"]
    for row in selection["candidates"]:
        value = row["accuracy"] if selection["metric"] == "accuracy" else row["agreement"]
        lines.append("| {} | {} | {} | {} | {} | {} | {} |".format(
            row["name"], row["precision"], "-" if value is None else "{:.2%}".format(value),
            "-" if row["drop"] is None else "{:.2f}".format(row["drop"]),
            "-" if row.get("drop_upper") is None else "{:.2f}".format(row["drop_upper"]),
            "-" if not row["throughput_ips"] else "{:.1f}".format(row["throughput_ips"]),
            "yes" if row["within_budget"] else "no"))
    lines += [""] + ["- " + note for note in selection.get("notes", [])]
    lines += ["", "## Layer sensitivity ({} INT8 ranges, {} tune images)".format(
        search["best_method"], search["tune_images"]), ""]
    if not search["sensitivity"]:
        lines.append("Not measured: int8-{} lost {:.2f} points on the tune split, within the budget, so no layer "
                     "had to stay in float.".format(search["best_method"], search.get("best_drop", 0.0)))
        return "\n".join(lines) + "\n"
    lines += ["Each layer alone in INT8, the rest in float; drop in {} points on the tune split.".format(
        label), "", "| rank | layer | op | drop |", "|---|---|---|---|"]
    for rank, row in enumerate(search["sensitivity"], 1):
        lines.append("| {} | {} | {} | {:.2f} |".format(rank, row["layer"], row["op"], row["drop"]))
    return "\n".join(lines) + "\n"


def chart(path, selection):
    """Accuracy (or agreement) against img/s of every candidate, with the budget line; False without matplotlib."""
    if not available("matplotlib"):
        log.info("matplotlib is not installed: no accuracy-vs-speed chart (pip install 'trtkit[bench]')")
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [r for r in selection["candidates"] if r["throughput_ips"] and r["drop"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        chosen = row["name"] == selection["chosen"]
        ax.scatter(row["throughput_ips"], -row["drop"], s=90 if chosen else 45,
                   marker="*" if chosen else "o", color="tab:green" if row["within_budget"] else "tab:red", zorder=3)
        ax.annotate(row["name"].split(".", 1)[-1], (row["throughput_ips"], -row["drop"]), textcoords="offset points",
                    xytext=(5, 5), fontsize=8)
    ax.axhline(-selection["max_drop"], color="gray", linestyle="--", label="budget: -{:g} points".format(
        selection["max_drop"]))
    ax.set_xlabel("images/s")
    ax.set_ylabel("{} change vs FP32 (points)".format(selection.get("metric_label", selection["metric"])))
    ax.set_title("precision search: chosen {}".format(selection["chosen"]))
    ax.legend(loc="lower left")
    ax.grid(alpha=0.3)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True
