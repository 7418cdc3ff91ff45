"""The HTTP service: the Starlette application, its routes, authentication (the caller as a value),
reading requests and the request log middleware. Routes read a request, hand it to app/service,
and render the answer.
"""
