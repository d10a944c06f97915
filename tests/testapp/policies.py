def only_2xx(status_code):
    return 200 <= status_code < 300


def only_200(status_code):
    return status_code == 200
