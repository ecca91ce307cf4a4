"""`staticfleet demo`: a local fleet that measures what static membership, cooperative
rebalancing and batch LeaveGroup buy.

Layout (one job per module):

* `settings`  — the knobs of one run;
* `admin`     — the admin HTTP calls the demo makes, as the operator would;
* `fleet`     — the coordinator subprocess and the member subprocesses;
* `settle`    — when is a group "Stable again" (describe + the members' own logs);
* `scenarios` — the six scenarios, recording what happened and when;
* `ownership`, `metrics`, `checks` — pure functions over rows (member event-log lines and
  journal rows, the latter read with `coordinator.journal_metrics`) that turn the
  recordings into numbers;
* `timeline`  — the PNG; `report` — the rich tables and `report.json`;
* `runner`    — one run, end to end, with a progress display.
"""
