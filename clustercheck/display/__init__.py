"""Display shared by every command: findings as lines and Markdown (findings.py), identical node outputs
folded (fold.py), report files written and read (report_files.py). Each stage shows its own facts (render.py).
"""
