# The module needs Terraform 1.5 or newer (check blocks, optional object
# attributes, lifecycle preconditions), the hashicorp/google 7.x line,
# hashicorp/time for the wait after the IAM grants (iam.tf), and
# hashicorp/random for the page token key (random_id, page_token_key.tf;
# https://registry.terraform.io/providers/hashicorp/random/latest/docs/resources/id).
# It configures no provider itself: the caller does (see examples/).
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
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6"
    }
  }
}
