# The module needs Terraform 1.5 or newer (check blocks, optional object
# attributes, lifecycle preconditions), the hashicorp/google 7.x line, and
# hashicorp/time for the wait after the IAM grants (iam.tf). It
# configures no provider itself: the caller does (see examples/).
terraform {
  required_version = ">= 1.5"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 7.0"
    }
    time = {
      source  = "hashicorp/time"
      version = "~> 0.9"
    }
  }
}
