"""The data behind phalanx's Kubernetes API server.

Pure modules the HTTP layer serves: the resources and their discovery
documents (:mod:`.resources`), the OpenAPI v3 documents (:mod:`.openapi`),
``kubectl get``'s Table responses (:mod:`.tables`) and server-side field
validation (:mod:`.fieldvalidation`). Nothing here does I/O at request time,
reads a clock or mutates module state (the documents are computed once and
cached).
"""
