"""Responses to Chat Completions and back, without I/O (tests/unit/test_architecture.py): the
request made from a response (chat_request, tools), the streamed answer translated into Responses
events and items (translate, output_items), and what is cut or summarized to fit a context
(truncation, compaction)."""
