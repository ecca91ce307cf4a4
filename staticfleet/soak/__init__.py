"""`make soak`: a seeded, randomized fault soak of a real coordinator and real member
processes, judged afterwards by a checker that reads only what the processes left behind
(event logs, the coordinator's SQLite journal and offsets, samples of the public HTTP API).

`plan` draws the faults from the seed, `driver` runs the processes and injects them,
`checker` judges the run; docs/soak.md says what is checked and why.
"""
