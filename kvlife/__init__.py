"""kvlife installed as one package: the harness folders (`model`, `impl`, `properties`, `fuzz`) and the data they
read (`upstream/findings.json`, `upstream/releases.txt`, `model/manifest.json`) live under this directory, never
as top-level names in site-packages. `kvlife.cli` puts this directory first on `sys.path` before it imports the
harness, so the harness keeps its absolute imports (`from impl.target import ...`) unchanged.
"""
