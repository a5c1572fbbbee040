"""Peers: other knowledge-base services a search also asks (one search across stores).

config reads the peers file, client is the one module that talks HTTP to a peer, breaker stops
asking a peer that keeps failing, router fans a search out and merges the answers. The search
service calls the router; the faces only read what it reports (kbsearch.peers.router.Unanswered).
"""
