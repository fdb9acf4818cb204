"""Egress allow-lists: sessions that may reach some hosts and nothing else.

Such a session sits on an internal engine network with no route out; the owner's egress proxy
(squid, ``images/egress``) sits on that network and on an outside one, and lets each session
reach only its own hosts. ``policy`` is the meaning of a host pattern and the server's ceiling,
``names`` what the proxy, its network and a session's proxy variables are called, ``proxy``
the proxy's lifecycle, ``journal`` its decisions per session, ``service`` what the session
manager calls, ``health`` what ``sandbox doctor`` says about it.
"""
