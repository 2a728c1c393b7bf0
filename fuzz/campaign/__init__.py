"""`python -m fuzz campaign`: a time-boxed fuzz campaign over every pool and swarm, on N worker processes.

A unit of work is one engine's run: Hypothesis (one seed, one pool, one swarm, `examples` test cases) or the seeded
walker (one seed, one pool, `examples x 150` steps, x 50 on the sglang target; the walker draws its own swarm from
the seed). Each worker walks its own seed stream; shards of a CI matrix split the seed space so that they never
repeat each other's units.
Workers share one example database, keyed per pool, swarm and faults, so that saved failures replay in the
configuration that found them. A failing step writes its unshrunk trace at once (a killed campaign keeps it); the
shrunk trace replaces it. Rerunning on the same `--out` re-checks what is already there, whichever engine wrote it.

**How the budget is split between engines (decision).** `--engines` picks them (default `walker,hypothesis`). With
both, each worker's units cycle walker, walker, walker, Hypothesis, from the worker's own offset, and a unit of each
lasts about as long (on the reference pool a walker unit walks three times a test case's 50 steps per example, at
three to four times the machine's steps per second; on upstream's, once: `plan.WALKER_STEPS_PER_EXAMPLE`): the
walker gets about three quarters of the time and most of the steps, because it reaches nearly every transition
Hypothesis reaches and many more per core second (`plan.UNIT_SHARE` has the figures); Hypothesis keeps a quarter
because its example database replays earlier failures first, and its shrinker and targeted generation find what a
uniform walk does not. Units are sized in steps and test cases, not seconds, so that a rerun with the same seed base
runs the same units; the engine of a unit is a function of its index, worker and shard, so seeds stay those of one
stream (`plan.unit_seed`) and never repeat across engines.

Besides the lifecycle corners, both engines count abstract transitions (`fuzz.walker.coverage`: the model state's
shape, the op, its outcome), sent with each heartbeat; the report shows them over time per engine and in union, and
each worker's steps/s over time with any stall (a stretch with no new step longer than `series.STALL_S`).

One concept a module, each importing only those before it:

- `plan`: the units' seeds, engines, configurations and sizes, and the lines that reproduce a campaign;
- `database`: the example database, keyed per configuration;
- `unit`: one unit of one engine, the seam an engine plugs into (`UnitRunner`), and the Hypothesis engine;
- `walker_unit`: the seeded walker's engine;
- `worker`: a worker process, its units (each by its engine's runner) and its heartbeat;
- `findings`: counterexamples grouped into findings and shapes;
- `resume`: the re-check of what an earlier run left in `--out`;
- `series`: bounded time series (each worker's steps, transitions over time) and stalls;
- `tally`: what the parent learns from its workers;
- `report_data`: the report's data and the exit code; `report`: its files (Markdown, JSON, plots, regressions);
- `supervisor`: the whole campaign, start to report; `cli`: its flags.
"""
