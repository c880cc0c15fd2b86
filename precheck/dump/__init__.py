"""Reading an msprobe dump: dump.json streamed, records decoded into cases, tensor files checked, API lists."""
