"""`python -m fuzz campaign`: a time-boxed fuzz campaign over every pool and swarm, on N worker processes.

A unit of work is one engine's run (plain Hypothesis: one seed, one pool, one swarm, `examples` test cases). Each
worker walks its own seed stream and rotates through the configurations; shards of a CI matrix split the seed space
so that they never repeat each other's units. Workers share one example database, keyed per pool, swarm and faults,
so that saved failures replay in the configuration that found them. A failing step writes its unshrunk trace at
once (a killed campaign keeps it); the shrunk trace replaces it. Rerunning on the same `--out` re-checks what is
already there. One concept a module, each importing only those before it:

- `plan`: the units' seeds, configurations and sizes, and the lines that reproduce a campaign;
- `database`: the example database, keyed per configuration;
- `unit`: one unit of one engine, and the seam a second engine plugs into (`UnitRunner`);
- `worker`: a worker process, its units and its heartbeat;
- `findings`: counterexamples grouped into findings and shapes;
- `resume`: the re-check of what an earlier run left in `--out`;
- `tally`: what the parent learns from its workers;
- `report_data`: the report's data and the exit code; `report`: its files (Markdown, JSON, plots, regressions);
- `supervisor`: the whole campaign, start to report; `cli`: its flags.
"""
