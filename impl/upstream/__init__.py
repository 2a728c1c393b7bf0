"""The upstream target: SGLang's own pool classes behind the reference pool's interface (`target.SglangPool`).

Nothing here imports sglang at module import time; `SglangPool` loads the installed version on first use and
raises `dialects.UnsupportedUpstream` where sglang is missing or of a version the adapter does not speak.
"""
