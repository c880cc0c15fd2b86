"""Where cases run: in the process, in supervised worker processes, or on Dask, results streamed back."""
