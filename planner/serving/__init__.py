"""Serving plans: estimate one deployment, search colocated and prefill/decode-disaggregated
layouts, build the serving Plan (``docs/serving.md``)."""
