FROM python:3.12-slim
RUN apt-get update -qq && apt-get install -y --no-install-recommends ffmpeg gettext && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml .
RUN pip install --no-cache-dir uv==0.13.8 && uv pip install --system -r pyproject.toml
COPY . .
ENV DJANGO_SETTINGS_MODULE=project.settings PYTHONUNBUFFERED=1
