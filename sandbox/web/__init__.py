"""The web view at ``/ui`` (``sandbox serve --web``): people sign in with a server token and
watch their token's sessions live, replay them, take them over and stop their jobs.

``app`` (the ASGI app and its endpoints), ``signin`` (a token becomes an HttpOnly cookie),
``feed`` (the session list), ``terminal`` (the live log as server-sent events; the replay),
``actions`` (take over, type, fit, signal), ``security`` (CSP, Host and Origin); ``static/``
holds the pages and the bundled browser libraries. Mounted by ``sandbox.mcp.http_web``.
"""
