"""The MCP surface: tools over stdio (an agent on a laptop) and streamable HTTP (a team's server).

``server`` registers the tools and maps results and errors to MCP; ``tools`` holds their
bodies and ``clients`` who may see and create which sessions; ``inputs`` validates tool
arguments; ``texts`` writes the text content a model reads; ``stdio`` and ``stdio_wire`` serve
one client on stdin/stdout; ``http`` and ``http_auth`` serve many with bearer tokens, and
``http_web`` mounts the web view (``sandbox.web``) beside them.
"""
