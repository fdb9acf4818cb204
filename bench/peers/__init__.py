"""The peers ``python -m bench --peers`` measures ours against: what people use instead.

Each peer lives in its own venv under ``bench/.peers/`` (gitignored, made on demand by
``bench.peers.install``, never at import) and runs in its own subprocess: that venv's python
running one of the ``driver_*.py`` scripts of this folder, which speak JSON lines (see
``protocol.py``). Their dependencies never meet ours. Their container images are built locally
FROM the session image; nothing is pulled.
"""
