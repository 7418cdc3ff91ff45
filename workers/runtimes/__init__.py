"""Model runtimes, all spoken to as OpenAI Chat Completions over HTTP: the client and its retries
(client, http_client), a prompt's length (prompt_length), and the model servers a worker starts
and keeps running (launch, supervisor, hosting). What is said to them is made in translation/."""
