"""Retrieval: vector stores searched for queries, in whichever process asks (the API's search
route, a worker's file_search call)."""
