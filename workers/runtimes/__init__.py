"""Model runtimes, all spoken to as OpenAI Chat Completions: the request made from a response
(chat_request, tools), the streamed answer translated back into Responses events and items
(translate, output_items), the HTTP client and its retries (client, http_client), a prompt's
length, and the model servers a worker starts and keeps running (launch, supervisor, hosting)."""
