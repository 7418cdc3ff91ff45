"""The lifecycle of a response, owned here: creation (validate, admit, persist, enqueue), reading
(retrieve, input items, resume), stopping (stop, cancel, delete), the token count, conversations,
compaction and the WebSocket session; and what an API process holds (state.py).
"""
