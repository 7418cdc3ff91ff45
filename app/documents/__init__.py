"""Documents: a file's bytes read into the text a model reads (PDF, DOCX, HTML, text of every
kind), the hostile ones failing alone in a bounded child process."""
