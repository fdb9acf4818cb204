"""Bytes in, views out: what a terminal makes of a shell's output.

The raw log keeps every byte the pty sent (``rawlog``); the stream scanner answers the
terminal's queries and feeds the lazy screen (``stream``); the transcript is the clean text a
person would have read (``transcript``); the screen is pyte's grid (``screen``); the asciicast
recording is for replay (``recording``); key names become the bytes a keyboard sends
(``keys``). Nothing here knows about containers, shells or sessions.
"""
