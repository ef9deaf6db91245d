"""Where `--ray` spends the two cores: CPU seconds by process, one machine against Ray.

    python benchmarks/bench_ray_cost.py [--docs 600] [--model mid] [--rounds 2]

Runs, in turn and in each round, `bge-m3-sparse index` on one machine and the
same command with `--ray` (a local Ray, one replica on every core), as a user
runs them (bench_index.py's settings, sparse and dense), on the same corpus.
While each runs, every process of its tree is sampled twice a second (RSS
and CPU seconds), and grouped by role: the command, vLLM's engine core and
model worker, and Ray's raylet, GCS, agents, task workers and replica
actor. Over each job's window (from its summary: the engine ready to the last
shard recorded) it prints the CPU seconds of each role, the cores they
kept busy, and the ratio of the jobs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import CPU_ENGINE_ENV, model_dir, print_settings, use_cpu_engine_env
from _procs import ProcessWatch
from bench_index import corpus, run_command, run_ray


def measure(
    run, model: Path, docs: list[str], work: Path
) -> tuple[float, float, dict[str, float], dict[str, float]]:
    """One run's job and whole-run seconds, and each role's CPU seconds over
    the job and over the whole run."""
    watches: list[ProcessWatch] = []
    job, wall, _ = run(model, docs, work, True, watches=watches)
    watch = watches[0]
    watch.join()
    end = watch.first_with_rows(len(docs))
    return job, wall, watch.cpu_by_role(end - job, end), watch.cpu_by_role(0.0, float("inf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--model", default="mid", choices=["small", "mid"])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    use_cpu_engine_env()  # as bench_index.py: the binding the command uses by default
    model = model_dir(args.model)
    docs = corpus(args.docs)
    print_settings(model=str(model), docs=args.docs, engine_env=CPU_ENGINE_ENV)
    paths = {"one machine": run_command, "--ray": run_ray}
    seconds: dict[str, dict[str, list[float]]] = {"job": {}, "whole run": {}}
    cpu: dict[str, dict[str, list[dict[str, float]]]] = {"job": {}, "whole run": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name, run in paths.items():
                job, wall, in_job, in_run = measure(run, model, docs, Path(tmp))
                for span, s, c in [("job", job, in_job), ("whole run", wall, in_run)]:
                    seconds[span].setdefault(name, []).append(s)
                    cpu[span].setdefault(name, []).append(c)
                busy = sum(in_job.values()) / job
                print(
                    f"round {round_ + 1}, {name}: job {job:.1f} s ({busy:.2f} cores busy), "
                    f"whole run {wall:.1f} s"
                )
    for span in ["job", "whole run"]:
        table(span, paths, seconds[span], cpu[span], args.rounds)


def table(
    span: str,
    paths: dict[str, object],
    seconds: dict[str, list[float]],
    cpu: dict[str, list[dict[str, float]]],
    rounds: int,
) -> None:
    """CPU seconds by process over each run's ``span``, the mean of the rounds."""
    roles = sorted(
        {r for runs in cpu.values() for by_role in runs for r in by_role},
        key=lambda r: -max(by_role.get(r, 0.0) for runs in cpu.values() for by_role in runs),
    )
    print(f"\nCPU seconds over each {span} (the mean of the rounds), by process:")
    print(f"{'process':<40}" + "".join(f"{name:>14}" for name in paths))
    for r in roles:
        means = [sum(b.get(r, 0.0) for b in cpu[name]) / rounds for name in paths]
        if max(means) >= 0.05:
            print(f"{r:<40}" + "".join(f"{m:>14.1f}" for m in means))
    totals = [sum(sum(b.values()) for b in cpu[name]) / rounds for name in paths]
    print(f"{'all':<40}" + "".join(f"{t:>14.1f}" for t in totals))
    means = [sum(seconds[name]) / rounds for name in paths]
    print(f"{span + ' seconds':<40}" + "".join(f"{m:>14.1f}" for m in means))
    print(f"{'cores busy':<40}" + "".join(f"{t / m:>14.2f}" for t, m in zip(totals, means)))
    ratios = [one / ray for one, ray in zip(seconds["one machine"], seconds["--ray"])]
    print(f"--ray / one machine, {span} by round: " + ", ".join(f"{r:.3f}" for r in ratios))


if __name__ == "__main__":
    main()
