"""Second-stage rerankers: score (query, passage) pairs more finely than the first stage can.

Each adapter owns one kind: a local ONNX cross-encoder read from a directory (`onnx`), or a remote
`/rerank` endpoint (`remote`). The listwise rerank by the chat model is a service
(kbsearch.services.search.rerank), because only kbsearch.llm speaks to the chat model.
"""
