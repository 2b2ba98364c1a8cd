"""The API's routers, one module per area: the public pages, reads, changes, chaos."""
