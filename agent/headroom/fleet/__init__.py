"""Fleet tooling: Prometheus file_sd target files for many agents (file_sd.py) and the right-sizing report
over a Prometheus that scrapes them (report.py). Nothing here runs inside the agent."""
