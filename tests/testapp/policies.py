def only_2xx(status_code):
    return 200 <= status_code < 300
