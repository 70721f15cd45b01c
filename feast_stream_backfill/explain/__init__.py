"""Explain a job: what its watermark bound B and allowed lateness L cost (:mod:`advisor`),
per-key and job pictures (:mod:`timeline`), an anomaly report (:mod:`anomalies`) and one HTML
page of all of it (:mod:`report`).

Built on the core's own stages, called as they are (processing times, the watermark sweep,
classification, firings, the emission log); nothing here changes the model. Aligned
event-time windows only (tumbling, sliding): B and L change nothing for processing-time
windows, and session firings have no closed form to reuse across settings.
"""
