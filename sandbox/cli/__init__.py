"""The ``sandbox`` command a person types (run, shell, attach, ls, logs, gc, doctor, serve...).

``main`` parses the verbs; ``run`` runs one command in a throwaway session; ``attach`` joins a
terminal to a session; ``inventory`` lists and cleans what the engine holds; ``doctor`` checks
the machine (its resource-limit probe in ``doctor_limits``, each line a ``check.Check``);
``console`` writes to the person's terminal.
"""
