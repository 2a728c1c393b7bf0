"""Component lockstep: each pool and allocator driven alone through its public methods, beside a tiny model of
its own contract, compared after every event.

Events name holders by model-level references (`fuzz.components.events`); the models know only ints
(`fuzz.components.models`); each unit is judged by its target's contract (`fuzz.components.contract`), and
`fuzz.components.search.run_components` fuzzes a whole target.
"""
