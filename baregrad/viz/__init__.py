"""VIZ=1: record what a script compiled and ran (record.py), save it as a JSON recording (fileformat.py), and serve a
page that shows it on 127.0.0.1 (server.py). `python3 -m baregrad.viz FILE [--port N]` serves a saved recording."""
