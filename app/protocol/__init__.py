"""The wire protocol: create requests and input items checked (strict pydantic models, OpenAI's
schema rules), tools, the Response object, the vocabulary of statuses and event types, events as
encoded once, ids, and sealed reasoning. Pure: nothing here reads a database or a network.
"""
