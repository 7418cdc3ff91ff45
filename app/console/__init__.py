"""The operator's console: every response of every account, live, in a browser (`/console`, on
with RESPONSES_CONSOLE). Server-rendered pages (Jinja2, every model's and user's text escaped as
text); one small script of its own (static/live.js) follows a running response. Its own
credential (an operator key, `responses-server operators create`), sessions in HttpOnly SameSite
cookies, a CSRF token on every action, and a Content-Security-Policy with no inline script."""
