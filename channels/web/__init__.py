"""The web app: chat and the memory's pages in a browser, served by `nanomem gateway` at `/`."""
