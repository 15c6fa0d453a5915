"""The workspace as context: reading folders safely (``reading``), what files define
(``symbols``), the per-folder index (``index``) and the context chosen per request (``context``)."""
