"""The seeded walker: a second generation engine beside the Hypothesis state machine, in the spirit of
deterministic simulation testing (TigerBeetle's VOPR).

One `random.Random(seed)` draws per-seed swarm weights over the ops, then walks: each step is drawn from what
the model says is possible now (request ids by status, arguments by the action table's sorts), run through
the same `fuzz.lockstep.Lockstep` as the machine's, and judged the same way. The seed alone replays a run
exactly; a failure is shrunk without Hypothesis (`fuzz.walker.shrink`) and written as the machine's are.
"""
